! arrays: the Fortran module's typed eckpt_protect(id, x), which computes the length itself and
! refuses what restart could not fill in place.
!
!   arrays
!
! First tries what must be refused, printing "protect <what>: <code> <message>" for each: the
! array sections a(1::2) and m(1,:), a section reaching the typed form through an
! assumed-shape dummy, and an assumed-size dummy (its size is unknown). Then protects whole
! arrays of every kind the typed form takes, of ranks 0 to 3 (under the ids the refusals used:
! a refusal protects nothing), and one array through the raw form eckpt_protect(id, ptr, len).
! A fresh run fills them and checkpoints; a rerun against the same store restores them. Both
! print every array's bytes in hex ("bytes <name> <hex>"), for the runs to be compared.
!
!   gfortran -O2 include/eckpt.f90 examples/fortran/arrays.f90 -Ltarget/release -leckpt -o arrays
!   ECKPT_DIR=/tmp/ck ./arrays; ECKPT_DIR=/tmp/ck ./arrays
program arrays
  use, intrinsic :: iso_c_binding, only: c_int, c_int8_t, c_int16_t, c_int64_t, c_float, c_double, c_float_complex, &
                                         c_double_complex, c_bool, c_size_t, c_loc
  use eckpt
  implicit none

  real(c_double), allocatable, target :: a(:)
  real(c_float), target :: m(4, 5)
  integer(c_int), target :: counts(3, 4, 2)
  integer(c_int64_t), target :: step
  complex(c_float_complex), target :: z(6)
  complex(c_double_complex), allocatable, target :: w(:, :)
  logical(c_bool), target :: mask(7)
  integer(c_int16_t), target :: tags(5)
  integer(c_int) :: rc
  integer :: i, j, k

  ! Zero in both runs: what a rerun prints is what restart wrote.
  allocate(a(1000), w(3, 3))
  a = 0
  m = 0
  counts = 0
  step = 0
  z = 0
  w = 0
  mask = .false.
  tags = 0

  call check(eckpt_init(), 'eckpt_init')

  call report('a(1::2)', eckpt_protect(1, a(1::2)))
  call report('m(1,:)', eckpt_protect(2, m(1, :)))
  call protect_assumed_shape(a(2::3))
  call protect_assumed_size(a)

  call check(eckpt_protect(1, a), 'eckpt_protect(a)')
  call check(eckpt_protect(2, m), 'eckpt_protect(m)')
  call check(eckpt_protect(3, counts), 'eckpt_protect(counts)')
  call check(eckpt_protect(4, step), 'eckpt_protect(step)')
  call check(eckpt_protect(5, z), 'eckpt_protect(z)')
  call check(eckpt_protect(6, w), 'eckpt_protect(w)')
  call check(eckpt_protect(7, mask), 'eckpt_protect(mask)')
  ! The raw form, for a kind the typed form does not take: the length is the caller's to get right.
  call check(eckpt_protect(8, c_loc(tags), int(storage_size(tags) / 8 * size(tags), c_size_t)), 'eckpt_protect(tags)')

  rc = eckpt_restart()
  call check(rc, 'eckpt_restart')
  if (rc > 0) then
    write (*, '(a, i0)') 'restarted epoch ', rc
  else
    ! Values that use every byte: signs, fractions, imaginary parts, more than 32 bits.
    a = [(real(i, c_double), i = 1, size(a))]
    m = reshape([(sin(real(i, c_float)), i = 1, size(m))], shape(m))
    counts = reshape([(7 * i - 40, i = 1, size(counts))], shape(counts))
    step = 2_c_int64_t**40 + 3
    z = [(cmplx(i, -i / 3.0, c_float_complex), i = 1, size(z))]
    w = reshape([((cmplx(1.0_c_double / j, sqrt(real(k, c_double)), c_double_complex), j = 1, 3), k = 1, 3)], shape(w))
    mask = [(mod(i, 3) == 0, i = 1, size(mask))]
    tags = [(int(-1000 * i, c_int16_t), i = 1, size(tags))]
    rc = eckpt_checkpoint()
    call check(rc, 'eckpt_checkpoint')
    write (*, '(a, i0)') 'fresh start, checkpoint epoch ', rc
  end if

  write (*, '(a, f0.1)') 'a(999) = ', a(999)
  call dump('a', transfer(a, [0_c_int8_t]))
  call dump('m', transfer(m, [0_c_int8_t]))
  call dump('counts', transfer(counts, [0_c_int8_t]))
  call dump('step', transfer(step, [0_c_int8_t]))
  call dump('z', transfer(z, [0_c_int8_t]))
  call dump('w', transfer(w, [0_c_int8_t]))
  call dump('mask', transfer(mask, [0_c_int8_t]))
  call dump('tags', transfer(tags, [0_c_int8_t]))
  call check(eckpt_finalize(), 'eckpt_finalize')

contains

  ! A library that wraps eckpt: its assumed-shape dummy keeps the caller's section strided, so
  ! the typed form sees it is not contiguous.
  subroutine protect_assumed_shape(b)
    real(c_double), intent(inout), target :: b(:)
    call report('b(:) given a(2::3)', eckpt_protect(3, b))
  end subroutine protect_assumed_shape

  ! An assumed-size dummy has no size the typed form could protect.
  subroutine protect_assumed_size(b)
    real(c_double), intent(inout), target :: b(*)
    call report('b(*) given a', eckpt_protect(4, b))
  end subroutine protect_assumed_size

  subroutine report(what, code)
    character(len=*), intent(in) :: what
    integer(c_int), intent(in) :: code
    write (*, '(a, a, a, i0, 1x, a)') 'protect ', what, ': ', code, eckpt_error_message(code)
  end subroutine report

  subroutine dump(name, bytes)
    character(len=*), intent(in) :: name
    integer(c_int8_t), intent(in) :: bytes(:)
    write (*, '(a, a, 1x, *(z2.2))') 'bytes ', name, bytes
  end subroutine dump

  subroutine check(code, what)
    integer(c_int), intent(in) :: code
    character(len=*), intent(in) :: what
    if (code < 0) then
      write (*, '(a, a, a)') what, ' failed: ', eckpt_error_message(code)
      error stop 1
    end if
  end subroutine check

end program arrays
